"""--find-capacity: the highest open-loop rate that meets --slo, found by probes (doubling, then bisection),
each judged by its attainment, failures and the rate the client sent, with who was the limit."""
