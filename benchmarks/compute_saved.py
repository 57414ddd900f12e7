"""Where replay pays: the compute-saved study, as `replay-rl study` runs it (replay_rl/study/main.py, which says
what it runs and writes). This script takes the same arguments:

    python benchmarks/compute_saved.py --preset quick      # ≤ 12 min here: baseline + one replay config, 2 seeds
    python benchmarks/compute_saved.py --preset mini --max-concurrent 2
"""

from replay_rl.study.main import main

if __name__ == "__main__":
    main()
