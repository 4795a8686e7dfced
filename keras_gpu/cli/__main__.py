"""`python -m keras_gpu.cli` runs the `keras-gpu` command."""

import sys

from keras_gpu.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
