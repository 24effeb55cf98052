"""The device kernels' tests run everywhere: on a machine without a CUDA device (CI), numba's
CUDA simulator runs them (``NUMBA_ENABLE_CUDASIM=1``, set here before ``numba.cuda`` is first
imported; slow, so the inputs are small); where ``nvidia-smi`` is on the PATH they run on the
device itself. The parts that need cuDF are marked ``gpu``."""

import os
import shutil
import sys

if "numba.cuda" not in sys.modules and shutil.which("nvidia-smi") is None:
    os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")
    from numba.core import config

    config.reload_config()
