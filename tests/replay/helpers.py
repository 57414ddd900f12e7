import numpy as np

from replay_rl.rollout import Rollout, RolloutBatch


def make_batch(n, *, version=0, start=0, correct=None, completion_len=4, seed=0):
    """n rollouts whose reward encodes their index (start + i), so tests can track items through the buffer.
    completion_len: an int, or a function of the index for rollouts of different lengths."""
    rng = np.random.default_rng(seed + start)
    out = []
    for i in range(start, start + n):
        ok = bool(i % 2) if correct is None else correct(i)
        length = completion_len(i) if callable(completion_len) else completion_len
        out.append(Rollout(np.array([i % 90, 1, 2], np.int32), rng.integers(0, 90, length).astype(np.int32),
                           -rng.random(length).astype(np.float32), float(i), float(ok) - 0.5, 0.5, ok, i // 16,
                           version, version, version, 0, 0))
    return RolloutBatch.from_rollouts(out)
