"""How does a job train? The one loop every job runs, its run state and the `best/` rule, the optimizer, data
parallelism and the run's logs. It knows no objective: a job hands it a model, a feeder, a loss, an
evaluation and a way to save.
"""
