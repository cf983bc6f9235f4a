// Package sqlplan plans the sql API onto getData: one SELECT over one table
// becomes the getData arguments that the RC cuts into portions like any
// other request, so SQL runs on the same DAPs, retries and merges as getData.
//
// Conditions on the time column become the request's time range (the
// purview the RC plans with), conditions on a label become its label
// selector, and conditions on other columns become getData filters. A WHERE
// that these cannot express exactly (OR across different columns, NOT) is
// kept whole as Plan.Where, a condition tree for the DAP to evaluate, while
// the time range and label selector implied by it still narrow the portions.
//
// Statements are parsed by TiDB's SQL parser (MySQL dialect: identifiers in
// backquotes, strings in single quotes). Everything outside the subset sg
// runs is refused with an error naming the construct: joins, subqueries,
// set operations, writes, HAVING, window functions, expressions in the
// select list.
package sqlplan

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/pingcap/tidb/pkg/parser"
	"github.com/pingcap/tidb/pkg/parser/ast"
	"github.com/pingcap/tidb/pkg/parser/opcode"
	"github.com/pingcap/tidb/pkg/parser/test_driver"

	"github.com/sg-project/sg/messages"
)

// Limits on what a statement may hold: the parser is recursive, so depth and
// size are bounded before it runs.
const (
	MaxStatementBytes = 64 << 10 // a statement above it is refused
	MaxConditionDepth = 32       // nesting of AND/OR/NOT/parentheses in WHERE
	MaxInList         = 10000    // values in one IN list
)

// Errors, wrapped with %w: ErrUnsupported for a construct sg does not run
// (NOT_SUPPORTED), ErrInvalid for a statement that is wrong (BAD_REQUEST).
var (
	ErrUnsupported = errors.New("not supported in sg's SQL")
	ErrInvalid     = errors.New("invalid SQL")
)

// Schema tells the planner what it cannot see in the statement: which
// column is the time column and which columns are labels.
type Schema struct {
	TimeColumn string                // "time" when empty
	IsLabel    func(col string) bool // nil: no labels
}

// Plan is a planned statement.
type Plan struct {
	Args messages.GetDataArgs
	// Where is the whole WHERE as a condition tree when it cannot be
	// expressed as getData's range, selector and filters alone; nil
	// otherwise. The range and selector in Args are then implied by it
	// (they only narrow which portions run), and the DAP evaluates Where.
	Where *Cond
}

// CondOp is the operator of a condition tree node.
type CondOp string

// Condition operators: the boolean ones, and a leaf holding a filter.
const (
	CondAnd    CondOp = "and"
	CondOr     CondOp = "or"
	CondNot    CondOp = "not"
	CondFilter CondOp = "filter"
)

// Cond is a node of a WHERE condition tree.
type Cond struct {
	Op     CondOp
	Args   []*Cond         // and, or: two or more; not: one
	Filter messages.Filter // CondFilter: a comparison on one column
}

func (c *Cond) String() string {
	switch c.Op {
	case CondFilter:
		return fmt.Sprintf("[%s %s %v]", c.Filter.Op, c.Filter.Column, c.Filter.Value)
	case CondNot:
		return "not " + c.Args[0].String()
	}
	parts := make([]string, len(c.Args))
	for i, a := range c.Args {
		parts[i] = a.String()
	}
	return "(" + strings.Join(parts, " "+string(c.Op)+" ") + ")"
}

// Parse plans one SELECT statement. It never panics on any input: a panic
// in the parser is a refusal, not a crash of the service that called it.
func Parse(sql string, schema Schema) (plan *Plan, err error) {
	defer func() {
		if r := recover(); r != nil {
			plan, err = nil, fmt.Errorf("%w: the statement could not be parsed (parser panic: %v)", ErrInvalid, r)
		}
	}()
	if len(sql) > MaxStatementBytes {
		return nil, fmt.Errorf("%w: statement of %d bytes is above the limit of %d", ErrInvalid, len(sql), MaxStatementBytes)
	}
	if d := parenDepth(sql); d > MaxConditionDepth {
		return nil, fmt.Errorf("%w: parentheses nested %d deep, above the limit of %d", ErrUnsupported, d, MaxConditionDepth)
	}
	if schema.TimeColumn == "" {
		schema.TimeColumn = "time"
	}
	if schema.IsLabel == nil {
		schema.IsLabel = func(string) bool { return false }
	}
	stmts, _, err := parser.New().Parse(quoteFirstLast(sql), "", "")
	if err != nil {
		return nil, fmt.Errorf("%w: syntax error: %s", ErrInvalid, firstLine(err.Error()))
	}
	switch {
	case len(stmts) == 0:
		return nil, fmt.Errorf("%w: no statement", ErrInvalid)
	case len(stmts) > 1:
		return nil, fmt.Errorf("%w: %d statements; send one SELECT", ErrUnsupported, len(stmts))
	}
	sel, ok := stmts[0].(*ast.SelectStmt)
	if !ok {
		return nil, fmt.Errorf("%w: %s; only SELECT is", ErrUnsupported, statementKind(stmts[0]))
	}
	p := &planner{schema: schema}
	return p.plan(sel)
}

type planner struct {
	schema Schema
	plan_  Plan
}

func (p *planner) plan(sel *ast.SelectStmt) (*Plan, error) {
	switch {
	case sel.With != nil:
		return nil, unsupported("WITH (common table expressions)")
	case sel.Kind != ast.SelectStmtKindSelect:
		return nil, unsupported("TABLE and VALUES statements")
	case sel.Having != nil:
		return nil, unsupported("HAVING")
	case len(sel.WindowSpecs) > 0:
		return nil, unsupported("window functions")
	case sel.LockInfo != nil && sel.LockInfo.LockType != ast.SelectLockNone:
		return nil, unsupported("SELECT ... FOR UPDATE")
	case sel.SelectIntoOpt != nil:
		return nil, unsupported("SELECT ... INTO")
	case sel.GroupBy != nil && sel.GroupBy.Rollup:
		return nil, unsupported("WITH ROLLUP")
	}
	a := &p.plan_.Args
	table, err := tableOf(sel.From)
	if err != nil {
		return nil, err
	}
	a.Table = table
	if err := p.fields(sel); err != nil {
		return nil, err
	}
	if sel.Where != nil {
		if err := p.where(sel.Where); err != nil {
			return nil, err
		}
	}
	if sel.OrderBy != nil {
		for _, it := range sel.OrderBy.Items {
			col, err := p.columnOrAlias(it.Expr, "ORDER BY")
			if err != nil {
				return nil, err
			}
			if it.Desc {
				col = "-" + col
			}
			a.SortCols = append(a.SortCols, col)
		}
	}
	if sel.Limit != nil {
		if sel.Limit.Offset != nil {
			return nil, unsupported("LIMIT with an OFFSET (page with a time range instead)")
		}
		n, err := intLiteral(sel.Limit.Count)
		if err != nil {
			return nil, fmt.Errorf("LIMIT: %w", err)
		}
		if n < 0 || n > math.MaxInt32 {
			return nil, fmt.Errorf("%w: LIMIT %d out of range", ErrInvalid, n)
		}
		if n == 0 {
			return nil, fmt.Errorf("%w: LIMIT 0 answers nothing", ErrInvalid)
		}
		a.Limit = int(n)
	}
	if err := a.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return &p.plan_, nil
}

// tableOf is the one table of FROM.
func tableOf(from *ast.TableRefsClause) (string, error) {
	if from == nil || from.TableRefs == nil {
		return "", fmt.Errorf("%w: FROM is required", ErrInvalid)
	}
	j := from.TableRefs
	if j.Right != nil {
		return "", unsupported("joins (one table per statement)")
	}
	ts, ok := j.Left.(*ast.TableSource)
	if !ok {
		if _, isJoin := j.Left.(*ast.Join); isJoin {
			return "", unsupported("joins (one table per statement)")
		}
		return "", unsupported("this FROM clause")
	}
	switch src := ts.Source.(type) {
	case *ast.TableName:
		if src.Schema.O != "" {
			return "", unsupported("schema-qualified table names")
		}
		return src.Name.O, nil
	case *ast.SelectStmt, *ast.SetOprStmt:
		return "", unsupported("subqueries")
	}
	return "", unsupported("this FROM clause")
}

// fields reads the select list: *, columns, or group columns and aggregates.
func (p *planner) fields(sel *ast.SelectStmt) error {
	a := &p.plan_.Args
	if sel.GroupBy != nil {
		for _, it := range sel.GroupBy.Items {
			col, err := p.column(it.Expr, "GROUP BY")
			if err != nil {
				return err
			}
			a.GroupBy = append(a.GroupBy, col)
		}
	}
	star := false
	var plain []string
	for _, f := range sel.Fields.Fields {
		if f.WildCard != nil {
			if f.WildCard.Table.O != "" {
				return unsupported("qualified wildcards")
			}
			star = true
			continue
		}
		if agg, ok, err := p.aggregate(f); err != nil {
			return err
		} else if ok {
			a.Agg = append(a.Agg, agg)
			continue
		}
		col, err := p.column(f.Expr, "the select list")
		if err != nil {
			return err
		}
		if f.AsName.O != "" && f.AsName.O != col {
			return unsupported(fmt.Sprintf("renaming column %s AS %s (aliases name aggregates only)", col, f.AsName.O))
		}
		plain = append(plain, col)
	}
	switch {
	case star && (len(plain) > 0 || len(a.Agg) > 0 || len(a.GroupBy) > 0):
		return unsupported("* beside other select items or with GROUP BY")
	case sel.Distinct && (len(a.Agg) > 0 || len(a.GroupBy) > 0):
		return unsupported("DISTINCT with GROUP BY or aggregates")
	case sel.Distinct:
		// SELECT DISTINCT a, b is GROUP BY a, b with no aggregate.
		a.GroupBy = plain
	case len(a.Agg) > 0 || len(a.GroupBy) > 0:
		for _, c := range plain {
			if !contains(a.GroupBy, c) {
				return fmt.Errorf("%w: column %s in the select list is neither grouped nor aggregated", ErrInvalid, c)
			}
		}
	default:
		a.Columns = plain
	}
	return nil
}

// aggregate reads one aggregate select item: count(*), count(col), sum, avg,
// min, max, and first/last (sg's, by time).
func (p *planner) aggregate(f *ast.SelectField) (messages.AggSpec, bool, error) {
	var (
		name string
		args []ast.ExprNode
	)
	switch e := f.Expr.(type) {
	case *ast.AggregateFuncExpr:
		if e.Distinct {
			return messages.AggSpec{}, false, unsupported(strings.ToUpper(e.F) + "(DISTINCT ...)")
		}
		if e.Order != nil {
			return messages.AggSpec{}, false, unsupported("ORDER BY inside an aggregate")
		}
		name, args = strings.ToLower(e.F), e.Args
	case *ast.FuncCallExpr:
		fn := e.FnName.L
		if fn != "first" && fn != "last" {
			return messages.AggSpec{}, false, unsupported(fmt.Sprintf("function %s() (aggregates: count sum avg min max first last)", e.FnName.O))
		}
		name, args = fn, e.Args
	default:
		return messages.AggSpec{}, false, nil
	}
	fn := messages.AggFunc(name)
	switch fn {
	case messages.AggCount, messages.AggSum, messages.AggAvg, messages.AggMin, messages.AggMax, messages.AggFirst, messages.AggLast:
	default:
		return messages.AggSpec{}, false, unsupported(fmt.Sprintf("aggregate %s() (aggregates: count sum avg min max first last)", name))
	}
	if len(args) != 1 {
		return messages.AggSpec{}, false, fmt.Errorf("%w: %s() takes one argument", ErrInvalid, name)
	}
	spec := messages.AggSpec{Func: fn}
	if v, ok := args[0].(*test_driver.ValueExpr); ok && fn == messages.AggCount && v.Kind() != test_driver.KindNull {
		// count(*) and count(1): rows in the group.
	} else {
		col, err := p.column(args[0], name+"()")
		if err != nil {
			return messages.AggSpec{}, false, err
		}
		spec.Column = col
	}
	spec.Name = f.AsName.O
	if spec.Name == "" {
		spec.Name = name
		if spec.Column != "" {
			spec.Name = name + "_" + spec.Column
		}
	}
	return spec, true, nil
}

// column reads a plain column reference.
func (p *planner) column(e ast.ExprNode, where string) (string, error) {
	switch c := e.(type) {
	case *ast.ColumnNameExpr:
		if c.Name.Table.O != "" {
			return "", unsupported("qualified column names (" + c.Name.Table.O + "." + c.Name.Name.O + ")")
		}
		return c.Name.Name.O, nil
	case *ast.ParenthesesExpr:
		return p.column(c.Expr, where)
	}
	return "", unsupported("expressions in " + where + " (" + exprKind(e) + "); name a column")
}

// columnOrAlias is column for ORDER BY, which may also name an aggregate.
func (p *planner) columnOrAlias(e ast.ExprNode, where string) (string, error) {
	if _, ok := e.(*ast.AggregateFuncExpr); ok {
		return "", unsupported("aggregates in ORDER BY; name the aggregate with AS and order by the name")
	}
	return p.column(e, where)
}

// where plans the WHERE clause: its top-level conjuncts on time and labels
// become the range and the selector; the rest become filters, or, when a
// conjunct cannot be a filter, the whole clause becomes Plan.Where.
func (p *planner) where(e ast.ExprNode) error {
	tree, err := p.cond(e, 0)
	if err != nil {
		return err
	}
	a := &p.plan_.Args
	residual := false
	for _, c := range conjuncts(tree) {
		if ok, err := p.pushTime(c); err != nil {
			return err
		} else if ok {
			continue
		}
		if ok, err := p.pushLabels(c); err != nil {
			return err
		} else if ok {
			continue
		}
		if c.Op == CondFilter {
			a.Filter = append(a.Filter, c.Filter)
			continue
		}
		residual = true
	}
	if residual {
		// The DAP evaluates the whole tree; the range and selector pushed
		// above stay, as they are implied by it (they are its conjuncts).
		p.plan_.Where = tree
		a.Filter = nil
	}
	// A label is not a column of the DAP's table: it can only choose label
	// sets, so it may only appear where it becomes the selector.
	return p.checkLabels(tree, true)
}

// checkLabels refuses a label used anywhere but in a top-level conjunct that
// selects label sets (=, IN, or an OR of those on the same label).
func (p *planner) checkLabels(c *Cond, top bool) error {
	if top {
		for _, cj := range conjuncts(c) {
			if _, _, ok := p.labelValues(cj); ok {
				continue
			}
			if err := p.checkLabels(cj, false); err != nil {
				return err
			}
		}
		return nil
	}
	if c.Op == CondFilter {
		if p.schema.IsLabel(c.Filter.Column) {
			return unsupported(fmt.Sprintf("label %s here: a label selects label sets with = or IN (or an OR of those), ANDed with the rest", c.Filter.Column))
		}
		return nil
	}
	for _, a := range c.Args {
		if err := p.checkLabels(a, false); err != nil {
			return err
		}
	}
	return nil
}

func conjuncts(c *Cond) []*Cond {
	if c.Op != CondAnd {
		return []*Cond{c}
	}
	var out []*Cond
	for _, a := range c.Args {
		out = append(out, conjuncts(a)...)
	}
	return out
}

// pushTime narrows the time range by a conjunct on the time column.
func (p *planner) pushTime(c *Cond) (bool, error) {
	if c.Op != CondFilter || c.Filter.Column != p.schema.TimeColumn {
		return false, nil
	}
	f := c.Filter
	a := &p.plan_.Args
	ts := func(v any) (time.Time, error) { return timeValue(v, p.schema.TimeColumn) }
	// The range so far, its open ends TSMin and TSMax: each conjunct
	// intersects it (an instant past them is clamped to them, as every
	// service reads the range).
	r := a.Range()
	narrow := func(start, end time.Time) { r, _ = r.Intersect(messages.TimeRangeOf(start, end)) }
	switch f.Op {
	case messages.FilterGe, messages.FilterGt, messages.FilterLe, messages.FilterLt, messages.FilterEq:
		t, err := ts(f.Value)
		if err != nil {
			return false, err
		}
		switch f.Op {
		case messages.FilterGe:
			narrow(t, time.Time{})
		case messages.FilterGt:
			narrow(t.Add(time.Nanosecond), time.Time{})
		case messages.FilterLe:
			narrow(time.Time{}, t.Add(time.Nanosecond))
		case messages.FilterLt:
			narrow(time.Time{}, t)
		case messages.FilterEq:
			narrow(t, t.Add(time.Nanosecond))
		}
	case messages.FilterWithin:
		list := f.Value.([]any)
		lo, err := ts(list[0])
		if err != nil {
			return false, err
		}
		hi, err := ts(list[1])
		if err != nil {
			return false, err
		}
		narrow(lo, hi.Add(time.Nanosecond))
	default:
		return false, unsupported(fmt.Sprintf("%s on the time column (use comparisons or BETWEEN)", f.Op))
	}
	if !r.Valid() {
		return false, fmt.Errorf("%w: the conditions on %s leave an empty time range", ErrInvalid, p.schema.TimeColumn)
	}
	a.StartTS, a.EndTS = r.Times()
	return true, nil
}

// pushLabels narrows the label selector by a conjunct on one label: =, IN,
// or an OR of those on the same label.
func (p *planner) pushLabels(c *Cond) (bool, error) {
	key, vals, ok := p.labelValues(c)
	if !ok {
		return false, nil
	}
	a := &p.plan_.Args
	if a.Labels == nil {
		a.Labels = messages.LabelSelector{}
	}
	if have, ok := a.Labels[key]; ok {
		vals = intersect(have, vals)
		if len(vals) == 0 {
			return false, fmt.Errorf("%w: the conditions on label %s select no value", ErrInvalid, key)
		}
	}
	a.Labels[key] = vals
	return true, nil
}

func (p *planner) labelValues(c *Cond) (string, []string, bool) {
	switch c.Op {
	case CondFilter:
		f := c.Filter
		if !p.schema.IsLabel(f.Column) {
			return "", nil, false
		}
		switch f.Op {
		case messages.FilterEq:
			if s, ok := f.Value.(string); ok {
				return f.Column, []string{s}, true
			}
		case messages.FilterIn:
			var out []string
			for _, v := range f.Value.([]any) {
				s, ok := v.(string)
				if !ok {
					return "", nil, false
				}
				out = appendUnique(out, s)
			}
			return f.Column, out, true
		}
	case CondOr:
		var key string
		var out []string
		for _, arg := range c.Args {
			k, vals, ok := p.labelValues(arg)
			if !ok || (key != "" && k != key) {
				return "", nil, false
			}
			key = k
			for _, v := range vals {
				out = appendUnique(out, v)
			}
		}
		return key, out, true
	}
	return "", nil, false
}

// cond turns a WHERE expression into a condition tree.
func (p *planner) cond(e ast.ExprNode, depth int) (*Cond, error) {
	if depth > MaxConditionDepth {
		return nil, unsupported(fmt.Sprintf("conditions nested deeper than %d", MaxConditionDepth))
	}
	switch x := e.(type) {
	case *ast.ParenthesesExpr:
		return p.cond(x.Expr, depth+1)
	case *ast.BinaryOperationExpr:
		switch x.Op {
		case opcode.LogicAnd, opcode.LogicOr:
			l, err := p.cond(x.L, depth+1)
			if err != nil {
				return nil, err
			}
			r, err := p.cond(x.R, depth+1)
			if err != nil {
				return nil, err
			}
			op := CondAnd
			if x.Op == opcode.LogicOr {
				op = CondOr
			}
			return &Cond{Op: op, Args: flatten(op, l, r)}, nil
		case opcode.EQ, opcode.NE, opcode.LT, opcode.LE, opcode.GT, opcode.GE:
			return p.comparison(x)
		}
		return nil, unsupported("operator " + x.Op.String() + " in WHERE")
	case *ast.UnaryOperationExpr:
		if x.Op == opcode.Not || x.Op == opcode.Not2 {
			inner, err := p.cond(x.V, depth+1)
			if err != nil {
				return nil, err
			}
			return &Cond{Op: CondNot, Args: []*Cond{inner}}, nil
		}
		return nil, unsupported("operator " + x.Op.String() + " in WHERE")
	case *ast.PatternInExpr:
		if x.Sel != nil {
			return nil, unsupported("subqueries")
		}
		col, err := p.column(x.Expr, "IN")
		if err != nil {
			return nil, err
		}
		if len(x.List) > MaxInList {
			return nil, fmt.Errorf("%w: IN list of %d values is above the limit of %d", ErrInvalid, len(x.List), MaxInList)
		}
		list := make([]any, 0, len(x.List))
		for _, v := range x.List {
			lit, err := literal(v)
			if err != nil {
				return nil, fmt.Errorf("IN (%s): %w", col, err)
			}
			list = append(list, lit)
		}
		return maybeNot(x.Not, leaf(messages.FilterIn, col, list)), nil
	case *ast.BetweenExpr:
		col, err := p.column(x.Expr, "BETWEEN")
		if err != nil {
			return nil, err
		}
		lo, err := literal(x.Left)
		if err != nil {
			return nil, fmt.Errorf("BETWEEN on %s: %w", col, err)
		}
		hi, err := literal(x.Right)
		if err != nil {
			return nil, fmt.Errorf("BETWEEN on %s: %w", col, err)
		}
		return maybeNot(x.Not, leaf(messages.FilterWithin, col, []any{lo, hi})), nil
	case *ast.PatternLikeOrIlikeExpr:
		if !x.IsLike {
			return nil, unsupported("ILIKE")
		}
		col, err := p.column(x.Expr, "LIKE")
		if err != nil {
			return nil, err
		}
		pat, err := literal(x.Pattern)
		if err != nil {
			return nil, fmt.Errorf("LIKE on %s: %w", col, err)
		}
		s, ok := pat.(string)
		if !ok {
			return nil, fmt.Errorf("%w: LIKE on %s needs a string pattern", ErrInvalid, col)
		}
		glob, err := likeToGlob(s, x.Escape)
		if err != nil {
			return nil, fmt.Errorf("LIKE on %s: %w", col, err)
		}
		return maybeNot(x.Not, leaf(messages.FilterLike, col, glob)), nil
	case *ast.SubqueryExpr, *ast.ExistsSubqueryExpr:
		return nil, unsupported("subqueries")
	case *ast.IsNullExpr:
		return nil, unsupported("IS NULL (sg's tables have no nulls)")
	}
	return nil, unsupported(exprKind(e) + " in WHERE")
}

// comparison reads column op literal (or literal op column, flipped).
func (p *planner) comparison(x *ast.BinaryOperationExpr) (*Cond, error) {
	op := map[opcode.Op]messages.FilterOp{opcode.EQ: messages.FilterEq, opcode.NE: messages.FilterNe,
		opcode.LT: messages.FilterLt, opcode.LE: messages.FilterLe, opcode.GT: messages.FilterGt, opcode.GE: messages.FilterGe}[x.Op]
	colSide, litSide := x.L, x.R
	if _, ok := unparen(x.L).(*ast.ColumnNameExpr); !ok {
		colSide, litSide = x.R, x.L
		op = map[messages.FilterOp]messages.FilterOp{messages.FilterLt: messages.FilterGt, messages.FilterLe: messages.FilterGe,
			messages.FilterGt: messages.FilterLt, messages.FilterGe: messages.FilterLe, messages.FilterEq: messages.FilterEq, messages.FilterNe: messages.FilterNe}[op]
	}
	col, err := p.column(colSide, "a comparison")
	if err != nil {
		return nil, err
	}
	if _, ok := unparen(litSide).(*ast.ColumnNameExpr); ok {
		return nil, unsupported("comparing two columns")
	}
	v, err := literal(litSide)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", col, op, err)
	}
	return leaf(op, col, v), nil
}

func leaf(op messages.FilterOp, col string, v any) *Cond {
	return &Cond{Op: CondFilter, Filter: messages.Filter{Op: op, Column: col, Value: v}}
}

func maybeNot(not bool, c *Cond) *Cond {
	if !not {
		return c
	}
	return &Cond{Op: CondNot, Args: []*Cond{c}}
}

// flatten merges nested nodes of the same operator: a AND (b AND c) is one
// AND of three.
func flatten(op CondOp, cs ...*Cond) []*Cond {
	var out []*Cond
	for _, c := range cs {
		if c.Op == op {
			out = append(out, c.Args...)
		} else {
			out = append(out, c)
		}
	}
	return out
}

func unparen(e ast.ExprNode) ast.ExprNode {
	for {
		p, ok := e.(*ast.ParenthesesExpr)
		if !ok {
			return e
		}
		e = p.Expr
	}
}

// literal reads a constant: a string, an integer, a decimal or a boolean.
func literal(e ast.ExprNode) (any, error) {
	e = unparen(e)
	if u, ok := e.(*ast.UnaryOperationExpr); ok && u.Op == opcode.Minus {
		v, err := literal(u.V)
		if err != nil {
			return nil, err
		}
		switch n := v.(type) {
		case int64:
			return -n, nil
		case float64:
			return -n, nil
		}
		return nil, fmt.Errorf("%w: minus before a non-number", ErrInvalid)
	}
	v, ok := e.(*test_driver.ValueExpr)
	if !ok {
		return nil, unsupported("a non-constant value (" + exprKind(e) + "); give a literal")
	}
	switch v.Kind() {
	case test_driver.KindInt64:
		return v.GetInt64(), nil
	case test_driver.KindUint64:
		u := v.GetUint64()
		if u > math.MaxInt64 {
			return nil, fmt.Errorf("%w: integer %d out of range", ErrInvalid, u)
		}
		return int64(u), nil
	case test_driver.KindFloat32, test_driver.KindFloat64:
		return v.GetFloat64(), nil
	case test_driver.KindMysqlDecimal:
		f, err := strconv.ParseFloat(v.GetMysqlDecimal().String(), 64)
		if err != nil {
			return nil, fmt.Errorf("%w: decimal %s: %v", ErrInvalid, v.GetMysqlDecimal().String(), err)
		}
		return f, nil
	case test_driver.KindString, test_driver.KindBytes:
		return v.GetString(), nil
	case test_driver.KindNull:
		return nil, unsupported("NULL (sg's tables have no nulls)")
	}
	return nil, unsupported("this kind of literal")
}

func intLiteral(e ast.ExprNode) (int64, error) {
	v, err := literal(e)
	if err != nil {
		return 0, err
	}
	n, ok := v.(int64)
	if !ok {
		return 0, fmt.Errorf("%w: want an integer, not %v", ErrInvalid, v)
	}
	return n, nil
}

// timeValue reads a time literal: RFC 3339 (with or without nanoseconds and
// zone, UTC assumed), or a date.
func timeValue(v any, col string) (time.Time, error) {
	s, ok := v.(string)
	if !ok {
		return time.Time{}, fmt.Errorf("%w: %s compares with a timestamp string such as '2026-11-22T10:00:00Z', not %v", ErrInvalid, col, v)
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05.999999999", "2006-01-02 15:04:05.999999999", "2006-01-02"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("%w: %s: %q is not a timestamp (want RFC 3339, e.g. 2026-11-22T10:00:00Z, or a date)", ErrInvalid, col, s)
}

// likeToGlob turns a SQL LIKE pattern (% any run, _ one character, an escape
// character) into getData's glob (* and ?), which has no escape: a literal *
// or ? cannot be expressed, so it is refused rather than mismatched.
func likeToGlob(pat string, escape byte) (string, error) {
	if escape == 0 {
		escape = '\\'
	}
	var b strings.Builder
	for i := 0; i < len(pat); i++ {
		c := pat[i]
		switch {
		case c == escape && i+1 < len(pat):
			i++
			if pat[i] == '*' || pat[i] == '?' {
				return "", unsupported("a literal * or ? in a LIKE pattern")
			}
			b.WriteByte(pat[i])
		case c == '%':
			b.WriteByte('*')
		case c == '_':
			b.WriteByte('?')
		case c == '*' || c == '?':
			return "", unsupported("a literal * or ? in a LIKE pattern")
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), nil
}

func unsupported(what string) error { return fmt.Errorf("%w: %s", ErrUnsupported, what) }

func statementKind(n ast.StmtNode) string {
	switch n.(type) {
	case *ast.InsertStmt:
		return "INSERT"
	case *ast.UpdateStmt:
		return "UPDATE"
	case *ast.DeleteStmt:
		return "DELETE"
	case *ast.SetOprStmt:
		return "UNION, INTERSECT and EXCEPT"
	case ast.DDLNode:
		return "DDL (CREATE, ALTER, DROP, ...)"
	}
	return strings.TrimPrefix(fmt.Sprintf("%T", n), "*ast.")
}

func exprKind(e ast.ExprNode) string {
	switch x := e.(type) {
	case *ast.FuncCallExpr:
		return "function " + x.FnName.O + "()"
	case *ast.AggregateFuncExpr:
		return "aggregate " + x.F + "()"
	case *ast.BinaryOperationExpr:
		return "operator " + x.Op.String()
	case *ast.SubqueryExpr:
		return "subquery"
	case *ast.CaseExpr:
		return "CASE"
	}
	return strings.TrimSuffix(strings.TrimPrefix(fmt.Sprintf("%T", e), "*ast."), "Expr")
}

// parenDepth is the nesting of parentheses outside string literals, checked
// before the recursive parser sees the statement.
func parenDepth(s string) int {
	depth, deepest := 0, 0
	var quote byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			if c == '\\' {
				i++
			} else if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"' || c == '`':
			quote = c
		case c == '(':
			depth++
			deepest = max(deepest, depth)
		case c == ')':
			depth--
		}
	}
	return deepest
}

// quoteFirstLast backquotes the aggregates first( and last(: FIRST and LAST
// are keywords of the MySQL dialect, where they are not functions, so the
// parser would refuse sg's first(price) unless the name is quoted.
func quoteFirstLast(s string) string {
	lower := strings.ToLower(s)
	var b strings.Builder
	var quote byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		if quote != 0 {
			b.WriteByte(c)
			if c == '\\' && i+1 < len(s) {
				i++
				b.WriteByte(s[i])
			} else if c == quote {
				quote = 0
			}
			continue
		}
		if c == '\'' || c == '"' || c == '`' {
			quote = c
			b.WriteByte(c)
			continue
		}
		wordStart := i == 0 || !isIdent(s[i-1])
		for _, fn := range []string{"first", "last"} {
			if !wordStart || !strings.HasPrefix(lower[i:], fn) {
				continue
			}
			j := i + len(fn)
			if j < len(s) && isIdent(s[j]) {
				continue
			}
			k := j
			for k < len(s) && (s[k] == ' ' || s[k] == '\t' || s[k] == '\n' || s[k] == '\r') {
				k++
			}
			if k < len(s) && s[k] == '(' {
				b.WriteString("`" + s[i:j] + "`")
				i = j - 1
				c = 0
			}
			break
		}
		if c != 0 {
			b.WriteByte(c)
		}
	}
	return b.String()
}

func isIdent(c byte) bool {
	return c == '_' || c == '$' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func appendUnique(list []string, s string) []string {
	if contains(list, s) {
		return list
	}
	return append(list, s)
}

func intersect(a, b []string) []string {
	var out []string
	for _, x := range a {
		if contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}
