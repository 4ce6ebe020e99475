import sys

from grader.cli import main

if __name__ == "__main__":  # not when a spawned process (a Dask worker) imports the main module again
    sys.exit(main())
