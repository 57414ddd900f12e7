"""`replay-rl study`: the compute-saved study (the on-policy baseline against replay buffers, on the paper's compute
axis), each run a Ray Tune trial that reserves its own shape; its analysis and reports."""
