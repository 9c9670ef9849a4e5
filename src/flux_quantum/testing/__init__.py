"""What checks flux-quantum's promises over a run: the promise checker
(``promises``).
"""
