"""The op input builders of `fd_mtp.testing.op_inputs`, one module per op family; import them
from there (``BUILDERS`` and every name are offered by that module)."""
