set terminal pngcairo size 900,560 font 'sans,10'
set output "docs/results/compare/ppl_vs_time.png"
set grid
set key top right
set xlabel 'training time (s)'
set ylabel 'validation perplexity'
plot "docs/results/compare/eval_0.dat" using 2:3 with linespoints title "ddp", "docs/results/compare/eval_1.dat" using 2:3 with linespoints title "fsdp", "docs/results/compare/eval_2.dat" using 2:3 with linespoints title "hsdp H=2", "docs/results/compare/eval_3.dat" using 2:3 with linespoints title "fl-fsdp S=2 K=8 iid", "docs/results/compare/eval_4.dat" using 2:3 with linespoints title "fl-hsdp S=4 H=2 K=8 iid"
unset output
set terminal svg size 900,560 font 'sans,10'
set output "docs/results/compare/ppl_vs_time.svg"
set grid
set key top right
set xlabel 'training time (s)'
set ylabel 'validation perplexity'
plot "docs/results/compare/eval_0.dat" using 2:3 with linespoints title "ddp", "docs/results/compare/eval_1.dat" using 2:3 with linespoints title "fsdp", "docs/results/compare/eval_2.dat" using 2:3 with linespoints title "hsdp H=2", "docs/results/compare/eval_3.dat" using 2:3 with linespoints title "fl-fsdp S=2 K=8 iid", "docs/results/compare/eval_4.dat" using 2:3 with linespoints title "fl-hsdp S=4 H=2 K=8 iid"
unset output
