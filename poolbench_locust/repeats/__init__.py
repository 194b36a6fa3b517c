"""--repeat N: the measured window run N times, stats reset between, each headline figure given as a
mean and a 95 % confidence interval (Student's t)."""
