"""--repeat N: the measured window cut into N consecutive repeats, stats reset between, each headline figure
given as a mean and a 95 % confidence interval (Student's t, widened when consecutive repeats are correlated,
refused when they are too correlated or too few: batch_means.py)."""
