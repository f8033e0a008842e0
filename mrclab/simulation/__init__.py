"""The simulator engine (`--engine sim`): a scenario in simulated time, through the agents' own transport code."""
