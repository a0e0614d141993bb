"""The graph's nodes, one module per agent; ``common`` holds what several of them share."""
