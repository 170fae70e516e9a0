"""Python client for tollgate's HTTP/JSON API (``tollgate serve``)."""

from ._async import (AsyncClient, AsyncDelivery, AsyncElection, AsyncGate, AsyncHeld, AsyncLease,
                     AsyncQueue, AsyncRoom, AsyncTicket, AsyncWorker)
from ._errors import TollgateError
from ._models import Backoff, Busy, Decision, DeliveryInfo, LeaseInfo, NewJob, Pushed, TicketInfo
from ._routes import ROUTES, Route
from ._sync import Client, Delivery, Election, Gate, Held, Lease, Queue, Room, Ticket, Worker

__all__ = [
    "AsyncClient", "AsyncDelivery", "AsyncElection", "AsyncGate", "AsyncHeld", "AsyncLease", "AsyncQueue",
    "AsyncRoom", "AsyncTicket", "AsyncWorker", "Backoff", "Busy", "Client", "Decision",
    "Delivery", "DeliveryInfo", "Election", "Gate", "Held", "Lease", "LeaseInfo", "NewJob", "Pushed",
    "ROUTES", "Route", "Room", "Ticket", "TicketInfo", "TollgateError", "Worker",
]
