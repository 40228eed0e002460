"""The node's memory accounting: per sandbox and per node, peak working set and memory·time."""
