import sys

from fgrpo_verl.cli import main

# guarded: a `spawn` child process (multiprocessing) imports the main module again
if __name__ == "__main__":
    sys.exit(main())
