"""`replay-rl probe`: measure the theory's constants (σ²(τ), α, ρ, κ, μ) on the user's task and model in a short
bounded run, and turn them into a recommended buffer size, split and learning rate (Theorem 4.5)."""
