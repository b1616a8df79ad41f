"""A sale (an activity) from the merchant's side and what everyone can read of it.

- ``activities``: create, edit, duplicate, the purchase token and the flag.
- ``lifecycle``: warm-up, start, close, the identity check; ``replay`` and
  ``reconciliation``: putting Redis and the database back in agreement.
- ``snapshot``: what the purchase path knows of an activity (the two-level cache);
  ``soldout``: the sold-out memory; ``selectors``: the units left to sell.
- ``claims`` and ``anomalies``: the orders' side of a reservation gone wrong.
- ``listing``, ``pages``, ``views``, ``apis``, ``serializers``: what shoppers see.
"""
