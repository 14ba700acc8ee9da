"""Where do the batches come from? Text and tables read, documents split, next-sentence pairs built, words
masked, batches streamed and corpora prepared in shards: token ids only, never the model.
"""
