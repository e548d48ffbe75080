"""Exceptions raised by traceflow. Every message says what went wrong and what to do about it.

* TraceflowError
  + UsageError          a bad argument or option           -> CLI exit 2 with the message
    + MissingPath       a path to import does not exist
    + UnknownSource     no importer of that name
    + UnknownQuery      no queries/<name>.sql
    + MissingParameter  a $param of a query was not given
  + QueryError          SQL that DuckDB rejected            -> CLI exit 1, names the views and columns
  + DecodeError         an OTLP payload we cannot read      -> HTTP 400 / gRPC INVALID_ARGUMENT
  + LakeError           the data directory is unusable      -> CLI exit 1
"""

from __future__ import annotations


class TraceflowError(Exception):
    """Base class of every error traceflow raises on purpose."""


class UsageError(TraceflowError):
    """The user asked for something that cannot be done as asked."""


class MissingPath(UsageError):
    """A path given to an importer does not exist."""


class UnknownSource(UsageError):
    """No importer has that name."""


class UnknownQuery(UsageError):
    """No packaged query has that name."""


class MissingParameter(UsageError):
    """A packaged query needs a parameter that was not given."""


class QueryError(TraceflowError):
    """DuckDB rejected a query."""


class DecodeError(TraceflowError):
    """A payload could not be decoded."""


class LakeError(TraceflowError):
    """The data directory cannot be read or written."""
