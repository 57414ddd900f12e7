"""Replay-service throughput: insert and sample rollouts/s through real Ray shard actors, for 1, 2 and 4 shards.

Rollouts are realistic in size (256-token completions with log-probs, 64-token prompts). Prints one JSON object.
Usage: python benchmarks/buffer_throughput.py [--seconds 3] [--batch 256]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import ray

from replay_rl.config import RunConfig
from replay_rl.config.replay_specs import shard_spec
from replay_rl.replay.client import ReplayClient, create_shards
from replay_rl.rollout import Rollout, RolloutBatch


def make_batch(n: int, rng: np.random.Generator, prompt_len: int = 64, completion_len: int = 256) -> RolloutBatch:
    return RolloutBatch.from_rollouts([
        Rollout(rng.integers(0, 32000, prompt_len).astype(np.int32), rng.integers(0, 32000, completion_len).astype(np.int32),
                -rng.random(completion_len).astype(np.float32), float(i % 2), 0.5, 0.5, bool(i % 2), i // 16, 0, 0, 0, 0, 0)
        for i in range(n)])


def percentiles(lat: list[float]) -> dict[str, float]:
    a = np.array(lat) * 1e3
    return {f"p{q}_ms": float(np.percentile(a, q)) for q in (50, 90, 99)}


def bench(shards_n: int, seconds: float, batch: int) -> dict:
    cfg = RunConfig.load(None, [f"cluster.learners={shards_n}", f"learner.batch_size={8 * shards_n}",
                                f"replay.capacity={4096 * shards_n}"])
    shards = create_shards(shard_spec(cfg))
    client = ReplayClient(shards, max_in_flight=4 * shards_n)
    payload = make_batch(batch, np.random.default_rng(0))
    ray.get([s.stats.remote() for s in shards])  # actors up before timing
    lat, n, t0 = [], 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        t = time.perf_counter()
        client.insert(payload)
        lat.append(time.perf_counter() - t)
        n += batch
    client.flush()
    insert_rate = n / (time.perf_counter() - t0)
    insert_lat = percentiles(lat)
    # sampling: every rank asks its own shard concurrently, like the learner group does
    per_rank = batch // shards_n
    lat, n, t0 = [], 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        t = time.perf_counter()
        ray.get([s.sample.remote(per_rank, 0) for s in shards])
        lat.append(time.perf_counter() - t)
        n += per_rank * shards_n
    sample_rate = n / (time.perf_counter() - t0)
    for s in shards:
        ray.kill(s)
    return {"shards": shards_n, "insert_rollouts_per_s": insert_rate, "sample_rollouts_per_s": sample_rate,
            "insert_call_latency": insert_lat, "sample_call_latency": percentiles(lat),
            "rollout_bytes": payload.nbytes // batch}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--batch", type=int, default=256, help="rollouts per insert call")
    args = ap.parse_args()
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    results = [bench(n, args.seconds, args.batch) for n in (1, 2, 4)]
    print(json.dumps({"benchmark": "buffer_throughput", "completion_tokens": 256, "batch": args.batch,
                      "results": results}, indent=2))


if __name__ == "__main__":
    main()
