"""Compatibility layers that let code written against other libraries run on fd_mtp.

``import fd_mtp.compat.fastdeploy`` makes FastDeploy's op module paths resolve to fd_mtp's ops
(see that module). Nothing here is imported by ``import fd_mtp``."""
