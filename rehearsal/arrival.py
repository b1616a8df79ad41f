"""How the shoppers arrive, as a flood does: a ramp before the start, a spike at it, a tail
after it; then the rehearsal waits for the journeys (and the unpaid orders' deadlines)."""

from __future__ import annotations

from dataclasses import dataclass

from locust import LoadTestShape


@dataclass(frozen=True)
class Arrival:
    shoppers: int
    lead_s: float  # from Locust's start to the sale's start: the ramp
    ramp: float = 0.3  # shares of the shoppers: before the start, at it, after it
    spike: float = 0.6
    spike_s: float = 3.0
    tail_s: float = 20.0
    settle_s: float = 90.0  # after the last arrival: results, payments, deadlines

    @classmethod
    def parse(cls, shape: str, **kwargs) -> Arrival:
        """``shape`` is "ramp,spike,tail" shares (they are scaled to add up to 1)."""
        parts = [float(p) for p in shape.split(",")]
        if len(parts) != 3 or any(p < 0 for p in parts) or sum(parts) <= 0:
            raise ValueError(f"--arrival {shape!r}: three non-negative shares, ramp,spike,tail (e.g. 0.3,0.6,0.1)")
        total = sum(parts)
        return cls(ramp=parts[0] / total, spike=parts[1] / total, **kwargs)

    @property
    def last_arrival_s(self) -> float:
        return self.lead_s + self.spike_s + self.tail_s

    def arrived(self, t: float) -> int:
        """Shoppers arrived ``t`` seconds after Locust's start."""
        n = self.shoppers
        ramped, spiked = n * self.ramp, n * (self.ramp + self.spike)
        if t < self.lead_s:
            return round(ramped * t / max(self.lead_s, 0.001))
        if t < self.lead_s + self.spike_s:
            return round(ramped + (spiked - ramped) * (t - self.lead_s) / self.spike_s)
        if t < self.last_arrival_s:
            return round(spiked + (n - spiked) * (t - self.lead_s - self.spike_s) / max(self.tail_s, 0.001))
        return n


class ArrivalShape(LoadTestShape):
    """Locust asks it every second: as many users as have arrived, spawned at the rate that
    reaches them within the next second; None (the end) after the settle time, or earlier
    once every shopper's journey is over (``done()``, known only without workers)."""

    arrival: Arrival | None = None
    done = staticmethod(lambda: False)

    def tick(self):
        arrival = type(self).arrival
        if arrival is None:
            return None
        t = self.get_run_time()
        if t > arrival.last_arrival_s + arrival.settle_s or (t > arrival.last_arrival_s and type(self).done()):
            return None
        users = arrival.arrived(t + 1.0)
        # Fast enough to reach them within a second, backlog included (a busy load machine spawns late).
        behind = users - (self.runner.user_count if self.runner is not None else arrival.arrived(t))
        return users, max(1.0, float(behind), float(users - arrival.arrived(t)))
