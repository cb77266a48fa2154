"""GPUs: NVML snapshots (live or saved) and the advice drawn from them.

``snapshot`` (NVML behind a provider seam, JSON snapshots), ``advice`` (leftover processes,
attention backend, colocation memory; model facts in ``model_specs.yaml``).
"""
