"""Answers that stay right under load (issue 41): how one observed answer compares with its reference
answer (measures.py), and the mergeable tally of many comparisons (tally.py). Pure: it knows no server,
no event and no report; the rooms above it (sweep steps, repeats, capacity probes) each carry a tally."""
