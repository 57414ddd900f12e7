"""The driver: the loop (trainer), the Ray session around it, the roles and their supervision, launch, health,
checkpoints and the run folder. It imports every other room; none imports it."""
