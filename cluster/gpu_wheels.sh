#!/usr/bin/env bash
# The packages cluster/gpu_check.py needs that our GPU box lacks, as wheels in .whl/ (git-ignored), at the
# versions this venv runs: deepspeed (built here with no compiled ops: the check uses torch's AdamW), hjson,
# pydantic and its helpers, for CPython 3.12 on x86-64. The box already has torch, transformers, numpy, pyyaml,
# msgpack, ninja, psutil, py-cpuinfo, tqdm, einops and packaging. Run it from an activated venv of this project.
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .whl && mkdir -p .whl
version() { python -c "import importlib.metadata as m; print(m.version('$1'))"; }
python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
  "pydantic==$(version pydantic)" "pydantic-core==$(version pydantic-core)" \
  "annotated-types==$(version annotated-types)" "typing-inspection==$(version typing-inspection)" \
  "hjson==$(version hjson)"
DS_BUILD_OPS=0 python -m pip wheel -q --no-deps --no-build-isolation -w .whl "deepspeed==$(version deepspeed)"
ls -l .whl
du -sh .whl
