"""Checkpoints: which exist (AReaL, slime/Megatron, Hugging Face), whether they are intact, how to resume."""
