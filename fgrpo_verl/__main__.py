import sys

from fgrpo_verl.cli import main

# guarded: a `spawn` child process (fgrpo_verl.launch.validator) imports the main module again
if __name__ == "__main__":
    sys.exit(main())
