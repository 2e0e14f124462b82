"""The machinery every project keeps unchanged: the command line, train, evaluate, predict and export, run
folders and records, checkpoints, checks and errors. What a project edits sits one level up."""
