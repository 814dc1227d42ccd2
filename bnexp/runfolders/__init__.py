"""Run folders: their files, locks, names, and the failed jobs of a sweep."""
