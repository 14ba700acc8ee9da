"""What does pretraining learn? One record per objective (masked words with next sentence, the next word,
both on one head) with its loss, its samples, its held-out batches and metrics, and a checkpoint's held-out
evaluation by its objective.
"""
