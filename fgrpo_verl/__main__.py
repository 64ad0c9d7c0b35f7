import sys

from fgrpo_verl.cli import main

sys.exit(main())
