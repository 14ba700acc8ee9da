"""How is a pretrained encoder taught a task? Classification and regression, question answering and
task-adaptive pretraining, each a record run by the one fine-tuning job.
"""
