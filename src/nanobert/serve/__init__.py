"""How does a browser see a model? `nanobert serve`: the app over the inference side's calls, its guards
and limits, and the page itself (web/).
"""
