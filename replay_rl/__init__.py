"""replay-rl: RL post-training of LLMs with experience replay."""

__version__ = "0.1.0"
