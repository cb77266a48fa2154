"""Training curves where they live: W&B and TensorBoard run folders, JSONL/CSV metric dumps, and
RL-specific health checks on them (entropy collapse, KL blow-up, length cap, stopped runs...)."""
