"""How good a model is: pass@k on a task's held-out split, the evaluator actor, and the warm start that gets a
model to a score RL can start from. Above generation and models; below the driver."""
