"""Order writes, one module per concern (callers import from the module itself; nothing
is re-exported here):

* ``creation``: reservations become orders (the consumer's batch insert with the
  database stock guard), a reservation given up for good, the database path's order,
  and the payment deadline scheduled for each new order.
* ``lifecycle``: pay, cancel, the deadline task and the sweeper, the units' return.
* ``anomalies``: a fault recorded once for staff; the missing-deduction repair.
* ``anomaly_actions``: staff actions on anomalies (resolve, recreate, return, …).
* ``addresses``: the shopper's shipping address and its copy on an order.
"""
