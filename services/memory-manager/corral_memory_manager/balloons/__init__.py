"""VM balloons: targets from the guests' own memory stats, through the node-agent."""
