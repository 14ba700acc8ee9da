"""What does a run leave on disk, and how does it come back? Checkpoint directories, their kinds and loading,
and a run's records read back.
"""
