"""How does `nanobert pretrain` run? The job, the recipes (presets and what a first run chooses), and the
first run's size rule.
"""
