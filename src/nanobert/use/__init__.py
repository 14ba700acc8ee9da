"""What can a trained model do? Load it and ask: fill-mask, next sentence, similarity, generation, sentence
scores and BLiMP, the explain trace, a fine-tuned model's labels and answers, their metrics, and pictures.
No training code.
"""
