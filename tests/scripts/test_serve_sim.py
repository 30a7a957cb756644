"""scripts/serve_sim.py against queueing results known in closed form, and its input checks."""
import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
import serve_sim  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checks import check, finish  # noqa: E402


# M/D/1: one worker, batch 1 only, a 2 ms pass, 250 requests/s (utilisation 0.5). The mean wait in
# the queue is rho * D / (2 (1 - rho)) = 1 ms, so the mean latency is 3 ms.
lat = serve_sim.simulate(250, {1: 2.0}, [1], n=400000, seed=5)
mean = sum(lat) / len(lat)
check(abs(mean - 3.0) < 0.06, f"M/D/1 mean latency {mean:.4f} ms, expected 3.0")
# Nothing is faster than its own pass.
check(min(lat) >= 2.0 - 1e-9, "a latency below the pass time")
# M/D/1 at utilisation 0.8: mean wait 0.8 * 2 / (2 * 0.2) = 4 ms.
lat = serve_sim.simulate(400, {1: 2.0}, [1], n=400000, seed=6)
mean = sum(lat) / len(lat)
check(abs(mean - 6.0) < 0.3, f"M/D/1 at 0.8: mean latency {mean:.4f} ms, expected 6.0")

# Batching: with passes that cost no more for more requests, one worker never takes longer than
# the pass plus one pass of waiting.
lat = serve_sim.simulate(2000, {1: 1.0, 8: 1.0}, [1, 8], n=20000, seed=7)
check(sorted(lat)[int(0.999 * len(lat))] <= 2.0 + 1e-9, "free batching left requests waiting over two passes")

# Interpolation and padding.
check(serve_sim.pass_time({1: 2.0, 4: 5.0}, 2) == 3.0, "interpolation between measured batches")
check(serve_sim.pass_time({1: 2.0, 4: 5.0}, 8) == 10.0, "past the largest: in proportion")
check(serve_sim.parse_sizes("1-4") == [1, 2, 3, 4], "a range of sizes")
for bad in ("2:1.0", "1:0", "x"):
    try:
        serve_sim.parse_pass_ms(bad)
        check(False, f"--pass-ms {bad} accepted")
    except ValueError:
        pass
check(serve_sim.main(["--rate", "0", "--pass-ms", "1:2"]) == 2, "a rate of 0 accepted")
check(serve_sim.main(["--rate", "10", "--pass-ms", "1:2", "--budget-ms", "5", "--cap", "2"]) == 2, "--budget-ms with --cap")

# The adaptive decision, on the cases tests/executor/test_serve.cpp gives BatchController: budget
# 10 ms, passes of 2, 3, 5 and 12 ms for batches 1, 2, 4 and 8.
passes = {1: 2.0, 2: 3.0, 4: 5.0, 8: 12.0}
sizes = [1, 2, 4, 8]


def take(waiting, oldest, drain="bounded", gap=2.0):
    return serve_sim.adaptive_take(waiting, oldest, sizes, lambda b: passes[b], 10.0, drain, gap)


check(take(20, 0.0) == (4, False), "in time: the largest batch whose pass ends within the budget")
check(take(20, 5.1) == (2, False), "in time after 5.1 ms: batch 2")
check(take(3, 0.0) == (2, False), "a padded 4 slower than a full 2")
check(take(20, 8.5, "max") == (4, True), "drain max: the most requests per ms")
check(take(20, 8.5, "bounded", 2.0) == (2, True), "drain bounded by 2 + 2 ms: batch 2")
check(take(20, 8.5, "bounded", 3.0) == (4, True), "drain bounded by 2 + 3 ms: batch 4")
# A budget nothing meets drains every request; one nothing misses drains none.
lat, drained = serve_sim.simulate_adaptive(200, passes, sizes, 1.0, n=5000, seed=3)
check(drained == 5000, f"{drained} of 5000 drained under a budget below every pass")
lat, drained = serve_sim.simulate_adaptive(200, passes, sizes, 1000.0, n=5000, seed=3)
check(drained == 0 and min(lat) >= 2.0 - 1e-9, "a budget nothing misses drained or answered early")
check(math.isclose(serve_sim.percentile([1, 2, 3, 4], 0.5), 2), "percentile")

finish("serve_sim")
