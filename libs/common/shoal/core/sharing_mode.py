"""KAI v0.18's GPU sharing modes (`gpuSharingMode`) and per-container compute modes: names and pure rules.

One setting, one name everywhere: `spec.gpuSharingMode` in a SchedulerConfig (`ShardConfig.gpu_sharing_mode`),
`SHOAL_GPU_SHARING_MODE` (+ `SHOAL_POOL_GPU_SHARING_MODES=pool-a=NvFractions,...` per node pool) for the
admission webhook, planner, binder and node agent. What each mode changes is written down in
docs/kai-compat.md ("GPU sharing modes and per-container GPU annotations").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from shoal.core.model import Pod

NON_MEMORY_ENFORCED = "NonMemoryEnforced"  # KAI's default: reservation pod + shared-GPU ConfigMaps
HAMI_CORE = "HamiCore"  # as NonMemoryEnforced, plus CUDA_DEVICE_MEMORY_LIMIT for HAMi-core
NV_FRACTIONS = "NvFractions"  # per-container annotations instead of the ConfigMaps; CUDA memory limits
DISABLED = "Disabled"  # fraction requests are refused
MODES = (NON_MEMORY_ENFORCED, HAMI_CORE, NV_FRACTIONS, DISABLED)
DEFAULT_MODE = NON_MEMORY_ENFORCED

TIME_SLICING = "time-slicing"  # KAI's default compute mode
SM_SHARING = "sm-sharing"
COMPUTE_MODES = (TIME_SLICING, SM_SHARING)


def disabled_message(pod_key: str) -> str:
    """KAI's admission text for a fraction request while sharing is disabled (reference §5.1)."""
    return f"attempting to create a pod {pod_key} with gpu sharing request, while GPU sharing is disabled"


def mode_problem(value: str, where: str) -> str | None:
    if value in MODES:
        return None
    return f"{where}: unknown GPU sharing mode {value!r}; known: {', '.join(MODES)}"


def parse_pool_modes(items: Iterable[str], where: str = "SHOAL_POOL_GPU_SHARING_MODES") -> tuple[dict[str, str], list[str]]:
    """`pool=Mode` items → {pool: mode}, and the problems (each names the item)."""
    modes: dict[str, str] = {}
    problems: list[str] = []
    for item in items:
        pool, sep, mode = item.partition("=")
        pool, mode = pool.strip(), mode.strip()
        if not sep or not pool:
            problems.append(f"{where}: {item!r} is not pool=Mode")
            continue
        problem = mode_problem(mode, f"{where} ({pool})")
        if problem:
            problems.append(problem)
            continue
        modes[pool] = mode
    return modes, problems


def mode_for_pool(default: str, pool_modes: Mapping[str, str], pool: str | None) -> str:
    """The mode of a node pool: its own entry, else the default."""
    return pool_modes.get(pool or "", default)


def request_error(pod: Pod, mode: str) -> str | None:
    """Why a pod's GPU-sharing request cannot be scheduled in `mode`: a malformed request (ingest's text),
    or any fraction while sharing is Disabled (admission denies those; this catches any that slip through)."""
    if pod.fraction_error:
        return pod.fraction_error
    if mode == DISABLED and pod.fraction is not None:
        return disabled_message(pod.key)
    return None
