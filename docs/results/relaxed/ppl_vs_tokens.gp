set terminal pngcairo size 900,560 font 'sans,10'
set output "docs/results/relaxed/ppl_vs_tokens.png"
set grid
set key top right
set logscale y
set ylabel 'validation perplexity (log scale)'
set xlabel 'tokens (global)'
plot "docs/results/relaxed/eval_0.dat" using 1:3 with linespoints title "fl-fsdp S=2 G=4 K=8 iid", "docs/results/relaxed/eval_1.dat" using 1:3 with linespoints title "fl-fsdp S=2 G=4 K=8 iid compress=int8", "docs/results/relaxed/eval_2.dat" using 1:3 with linespoints title "fl-fsdp S=2 G=4 K=8 iid overlap=delayed", "docs/results/relaxed/eval_3.dat" using 1:3 with linespoints title "fl-fsdp S=2 G=4 K=8 iid overlap=delayed compress=int8", "docs/results/relaxed/eval_4.dat" using 1:3 with linespoints title "fl-fsdp S=2 G=4 K=8 iid overlap=streaming:4", "docs/results/relaxed/eval_5.dat" using 1:3 with linespoints title "fl-fsdp S=2 G=4 K=8 iid overlap=streaming:4 compress=int8"
unset output
set terminal svg size 900,560 font 'sans,10'
set output "docs/results/relaxed/ppl_vs_tokens.svg"
set grid
set key top right
set logscale y
set ylabel 'validation perplexity (log scale)'
set xlabel 'tokens (global)'
plot "docs/results/relaxed/eval_0.dat" using 1:3 with linespoints title "fl-fsdp S=2 G=4 K=8 iid", "docs/results/relaxed/eval_1.dat" using 1:3 with linespoints title "fl-fsdp S=2 G=4 K=8 iid compress=int8", "docs/results/relaxed/eval_2.dat" using 1:3 with linespoints title "fl-fsdp S=2 G=4 K=8 iid overlap=delayed", "docs/results/relaxed/eval_3.dat" using 1:3 with linespoints title "fl-fsdp S=2 G=4 K=8 iid overlap=delayed compress=int8", "docs/results/relaxed/eval_4.dat" using 1:3 with linespoints title "fl-fsdp S=2 G=4 K=8 iid overlap=streaming:4", "docs/results/relaxed/eval_5.dat" using 1:3 with linespoints title "fl-fsdp S=2 G=4 K=8 iid overlap=streaming:4 compress=int8"
unset output
