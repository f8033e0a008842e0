"""From counters and timestamps to the figures of results.json."""
