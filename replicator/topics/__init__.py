"""Which source topics are replicated (`filter`) and keeping their target topics in line: creation,
partitions and configs (`sync`)."""
