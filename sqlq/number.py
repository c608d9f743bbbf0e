"""``Number``: a time or a duration in seconds as the queue takes it, an int or a float. On its own,
a leaf, so that the records can name it without importing the contract package."""

Number = int | float
