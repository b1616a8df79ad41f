"""Rehearse a sale before it happens: a rehearsal sale and its shoppers (tagged, removable),
Locust users that shop as the page does, a report with charts and a verdict (docs notes:
the rehearsal how-to)."""
