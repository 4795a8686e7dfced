"""The meters: arithmetic over counts, clocks and traces (rates, FLOPs, step-time breakdowns, the cluster view, placement)."""
