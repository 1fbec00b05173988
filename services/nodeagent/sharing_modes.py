"""How the node agent's memory policing and MPS values follow KAI v0.18's GPU sharing mode (pure).

| mode | who holds a share to its limit | agent: over-share | agent: borrowed-memory reclaim | MPS values into |
|---|---|---|---|---|
| NonMemoryEnforced | nobody but the agent | the pool's policy (off/report/enforce) | as configured | the `-evar` ConfigMap |
| HamiCore | HAMi-core (`CUDA_DEVICE_MEMORY_LIMIT`) | report at most | as configured | the `-evar` ConfigMap |
| NvFractions | the runtime's CUDA memory limits | report at most | off (the runtime's soft limits) | nothing (the runtime injects them) |
| Disabled | no fraction should exist | report at most | off | nothing |

"report at most": an `enforce` pool reports instead of killing (a second enforcer would only race the first).

Compute modes (`nvidia.com/container.<c>.gpu-compute.mode`): an `sm-sharing` pod's MPS active-thread
percentage is its compute share (its SMs are partitioned); a pod that states `time-slicing` takes turns on the
whole GPU and gets 100. A pod that states neither keeps Shoal's MPS behaviour from before compute modes (its
compute share).
"""

from __future__ import annotations

import dataclasses

from services.nodeagent.memory_policy import PolicyConfig
from shoal.core.sharing_mode import DISABLED, HAMI_CORE, NON_MEMORY_ENFORCED, NV_FRACTIONS, TIME_SLICING

THREADS = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"


def mode_policy(policy: PolicyConfig, mode: str) -> PolicyConfig:
    if mode == NON_MEMORY_ENFORCED:
        return policy
    capped = "report" if policy.policy == "enforce" else policy.policy
    reclaim = policy.dynamic_fractions and mode == HAMI_CORE
    return dataclasses.replace(policy, policy=capped, dynamic_fractions=reclaim)


def writes_mps_configmaps(mode: str) -> bool:
    return mode not in (NV_FRACTIONS, DISABLED)


def mps_values(env: dict[str, str], compute_mode: str | None) -> dict[str, str]:
    """`timeslice.mps_env`'s values adjusted to the pod's stated compute mode."""
    if compute_mode == TIME_SLICING:
        return {**env, THREADS: "100"}
    return env
