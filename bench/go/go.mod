module migfit.invalid/benchfloors

go 1.19
