DROP TABLE transient_failure;
DROP TABLE suppression;
