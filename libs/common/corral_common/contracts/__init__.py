"""Wire contracts between Corral services: the models both sides of a call agree on, and their clients."""
