"""fd_mtp: PaddlePaddle custom ops for MTP (multi-token-prediction) speculative decoding.

Importing this package is cheap: paddle and the compiled extension are loaded on
first use of an op (`fd_mtp.ops`), the numpy references (`fd_mtp.reference`)
need only numpy, and the raw CUDA module (`fd_mtp.cuda`) needs no paddle.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
