// Package parquetdb stores time-partitioned tables as date-partitioned Parquet files and
// answers getData on them reading only what a portion needs.
//
// Layout (users may bring their own data in it):
//
//	<dir>/<table>/date=<YYYY-MM-DD>/<from>-<to>.parquet
//
// <dir> is the DAP's data directory, <table> a table name, the date partition the UTC day
// of the rows, and <from>-<to> the half-open time range [from, to) of the file in unix
// nanoseconds: every row's time is inside it, and files of one table do not overlap. A
// file whose name does not follow that pattern is accepted too; its range is then read
// from its footer (the min and max statistics of the time column). In every file:
//   - one column per column of the table, by name: time as INT64 (TIMESTAMP(NANOS) when
//     written here), int as INT64, float as DOUBLE, bool as BOOLEAN, symbol and string
//     as BYTE_ARRAY (UTF-8); the DAP's table definition says which is a symbol;
//   - rows sorted by time, in row groups that carry min/max statistics (parquet-go writes
//     them), which is what lets a narrow query skip the rest.
//
// A query opens only the partitions and files whose range meets the portion, reads only
// the footers of those files, only the row groups whose time statistics meet the range,
// and in them only the columns the request names (selected, filtered, grouped,
// aggregated, label and time columns). A row query in time order with a limit reads
// files and row groups in time order and stops once it holds the limit (and the rows
// tied with the last). Stats counts all of it, so tests and metrics can show that a
// narrow query over a large history read a small part of it.
package parquetdb
