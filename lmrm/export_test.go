package lmrm

// DescribeAll is describeAll for the package's external tests.
var DescribeAll = describeAll
